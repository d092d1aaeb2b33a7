"""`hasten doctor`: probe an OpenAI-compatible endpoint and explain where the time goes.

``probe.py`` does the bounded network probes and returns raw timings (``timings.py``);
``analysis.py`` turns them into estimates and what each hasten lever would save, purely;
``report.py`` renders the text report and the JSON; ``cli.py`` is the command.
"""
