from ragloop.cli import main

main()
