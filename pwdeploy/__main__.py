from pwdeploy.cli import main

main()
