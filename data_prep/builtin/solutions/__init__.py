"""Reference Triton solutions of the built-in problems, read as text by data_prep.builtin.

A package only so that installs ship the files."""
