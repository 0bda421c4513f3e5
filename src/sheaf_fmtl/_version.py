"""The package's version, in a module that imports nothing: ``pyproject.toml`` reads it when the
package is built, and modules deep in the package (the run folder's recorder) read it without
importing the package root, which imports the whole API."""

__version__ = "0.1.0"
