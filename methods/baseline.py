"""``base``: the preset's encoder evaluated as is, the row every comparison starts from."""

from dsgen.method import Method, register_method


@register_method("base")
def base() -> Method:
    return Method(description="the untrained encoder, evaluated as is (no generation, no training)",
                  paper="-", generator=None, postprocess=None, trainer=None)
