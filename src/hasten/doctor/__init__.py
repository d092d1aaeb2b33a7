"""`hasten doctor`: probe an OpenAI-compatible endpoint and explain where the time goes.

``connection.py`` times DNS, TCP connect and TLS; ``probe.py`` does the bounded HTTP probes
and returns raw timings (``timings.py``);
``analysis.py`` turns them into estimates and what each hasten lever would save, purely;
``report.py`` renders the text report and the JSON; ``cli.py`` is the command.
"""
