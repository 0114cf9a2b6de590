"""The lab's bleu_sentence metric (mean sentence BLEU-4) as an `evaluate` module.

    evaluate.load("<this folder>").compute(predictions=[...], references=[...])

Scores are 0-100 and come from lab.eval.metrics (no metric code here).
"""
from lab.eval.metrics import evaluate_module

BleuSentence = evaluate_module("bleu_sentence", "BleuSentence")
