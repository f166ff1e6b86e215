"""Built-in problem files (KernelBench format), read as text by data_prep.builtin.

A package only so that installs ship the files."""
