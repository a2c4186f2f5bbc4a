"""`python -m persobench`: the command line (:mod:`persobench.cli`)."""

if __name__ == "__main__":
    # Imported here, not above: a spawned worker process (the lexical worker pool) re-imports this
    # module under another name, and needs none of the command line.
    from persobench.cli import run

    run()
