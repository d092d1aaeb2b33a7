"""What more than one test file needs: real servers, gateway configs, disk faults, fakes."""
