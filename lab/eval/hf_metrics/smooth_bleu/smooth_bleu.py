"""The lab's smooth_bleu metric (CodeXGLUE code-to-text's smoothed sentence BLEU-4, the
summarisation task's BLEU) as an `evaluate` module.

    evaluate.load("<this folder>").compute(predictions=[...], references=[...])

Scores are 0-100 and come from lab.eval.metrics (no metric code here).
"""
from lab.eval.metrics import evaluate_module

SmoothBleu = evaluate_module("smooth_bleu", "SmoothBleu")
