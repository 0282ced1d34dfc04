"""Helpers every layer uses; none imports another ``nurec_usd`` package.

- ``staging``: files and folders written all or nothing (``atomic_file``, ``StagedDirectory``).
- ``prefetch``: reading ahead in threads; ``pictures``: images of tensors (PNG/JPEG encoding,
  range pictures, contact sheets).
- ``options``: declared ranges of every option and their checks; ``progress``: progress bars and
  plain progress lines; ``profiling``: stage and step tables; ``interrupts``: Ctrl-C and SIGTERM;
  ``io_errors``: one-line messages for file errors; ``resources``: the package's data files.
"""
