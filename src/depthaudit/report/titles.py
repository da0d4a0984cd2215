"""Titles of the depth-sufficiency tables, from a results file alone (the command and `report` write the same)."""


def saturation_title(doc: dict) -> str:
    """The saturation table's title from its file alone (the command and ``report`` write the same one)."""
    ident = doc["identity"]
    if ident.get("family") == "hf":
        rev = f" at {ident['revision']}" if ident.get("revision") else ""
        more = f", {ident['continue_steps']} continued-pretraining steps" if ident.get("continue_steps") else ""
        return f"Depth saturation of pretrained causal LMs{rev} on {ident.get('data', '?')}{more}"
    if ident.get("family") == "gpt":
        what = f"GPT decoder (d={ident.get('d_hidden')}) on text"
    elif ident.get("family") == "resmlp":
        what = (f"{ident.get('arch', 'resmlp')} (d={ident.get('d_hidden')}) under {ident.get('method')} "
                f"on {ident.get('data')}")
    else:
        what = f"ResNet-CIFAR on {ident.get('data', '?')}"
    return f"Depth saturation: {what}, {ident.get('epochs', '?')} epochs"
