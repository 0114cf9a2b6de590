"""The lab's em_tokens metric (exact match of whitespace tokens, whatever the task) as an
`evaluate` module.

    evaluate.load("<this folder>").compute(predictions=[...], references=[...])

Scores are 0-100 and come from lab.eval.metrics (no metric code here).
"""
import evaluate

from lab.eval import metrics


class ExactMatchTokens(evaluate.Metric):
    def _info(self):
        return metrics.evaluate_info("em_tokens")

    def _compute(self, predictions, references):
        return metrics.evaluate_compute("em_tokens", predictions, references)
