"""Titles of the depth-sufficiency tables, from a results file alone (the command and `report` write the same)."""


def saturation_title(doc: dict) -> str:
    """The saturation table's title from its file alone (the command and ``report`` write the same one)."""
    from ..experiments.families import family_of

    return family_of(doc["identity"]).saturation_title(doc["identity"])
