"""Titles of the depth-sufficiency tables, from a results file alone (the command and `report` write the same).

The words come from the family the file names (:func:`~depthaudit.experiments.families.family_of`: its
``*_what``/``*_title`` methods), a module below the report that imports no report module.
"""

from ..experiments.families import family_of


def saturation_title(doc: dict) -> str:
    """The saturation table's title from its file alone (the command and ``report`` write the same one)."""
    return family_of(doc["identity"]).saturation_title(doc["identity"])
