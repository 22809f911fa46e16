"""The demos: ``make demo`` tells four stories (``python -m undolog.demos``, in
``stories``), and ``undolog dashboard --demo`` adds what a person acts on in the
dashboard (``dashboard``). They use the binding only, and run the command as a separate
process, as a person would."""
