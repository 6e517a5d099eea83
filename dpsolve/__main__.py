import sys

try:                                 # Ctrl-C while the command line module itself loads
    from .cli import main
except KeyboardInterrupt:
    sys.stderr.write("dpsolve: interrupted\n")
    sys.exit(130)

sys.exit(main())
