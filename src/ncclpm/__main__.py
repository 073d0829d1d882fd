from ncclpm.cli import main

main()
