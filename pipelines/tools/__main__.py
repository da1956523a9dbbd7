"""`python -m pipelines.tools verify|inspect|report OUT ...`: the same as `create_hdf5_dataset verify|inspect|report`."""

import sys

from pipelines.tools.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
