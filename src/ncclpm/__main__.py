from ncclpm.cli import run

run()
