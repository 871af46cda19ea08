import sys

from jaxqueue.cli import main

sys.exit(main())
