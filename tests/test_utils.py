"""Small helpers of ``fastkpca._utils``."""

from __future__ import annotations

import json

import numpy as np

from fastkpca._utils import plain


def test_plain_gives_json_ready_python_values():
    # One conversion serves AutoKPCA's report, the metrics' dicts and the command line's JSON.
    value = {
        1: (np.float64(0.5), np.int64(3), np.bool_(True)),
        "a": np.arange(4.0).reshape(2, 2),
        "b": [np.float32(0.25), None, "x"],
    }
    out = plain(value)
    assert out == {"1": [0.5, 3, True], "a": [[0.0, 1.0], [2.0, 3.0]], "b": [0.25, None, "x"]}
    assert type(out["1"][1]) is int and type(out["1"][2]) is bool
    json.dumps(out)
    kernel = object()
    assert plain({"k": kernel})["k"] is kernel  # anything else as it is
