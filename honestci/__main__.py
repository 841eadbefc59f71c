"""``python -m honestci`` runs the command line."""

from honestci.audit.cli import run

if __name__ == "__main__":
    run()
