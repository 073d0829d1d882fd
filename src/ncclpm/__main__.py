from ncclpm.command import run

run()
