"""``python -m harness.cli ARGS``: the ``harness`` command."""

from harness.cli import main

if __name__ == "__main__":  # a worker process imports this module as __mp_main__: it must not run main()
    main()
