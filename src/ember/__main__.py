"""``python -m ember``: the same as the ``ember`` command."""

from ember.cli import main

if __name__ == "__main__":
    main()
