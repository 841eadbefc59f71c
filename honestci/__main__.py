"""``python -m honestci`` runs the command line."""

from honestci.audit.cli import main

if __name__ == "__main__":
    main()
