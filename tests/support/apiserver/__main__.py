from tests.support.apiserver.server import main

main()
