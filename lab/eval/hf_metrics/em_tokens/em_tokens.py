"""The lab's em_tokens metric (exact match of whitespace tokens, whatever the task) as an
`evaluate` module.

    evaluate.load("<this folder>").compute(predictions=[...], references=[...])

Scores are 0-100 and come from lab.eval.metrics (no metric code here).
"""
from lab.eval.metrics import evaluate_module

ExactMatchTokens = evaluate_module("em_tokens", "ExactMatchTokens")
