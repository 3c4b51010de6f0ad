"""Entry point of the trainplane Pulumi plugin: serve the repository's components (``components.package``).

The Python language host runs ``python <this directory> <engine address>``; the components are imported
from the repository this directory belongs to.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from components.package import serve

if __name__ == "__main__":
    serve()
