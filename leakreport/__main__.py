from leakreport.cli import main

main()
