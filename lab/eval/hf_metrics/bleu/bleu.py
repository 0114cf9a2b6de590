"""The lab's bleu metric (CodeXGLUE's corpus BLEU-4) as an `evaluate` module.

    evaluate.load("<this folder>").compute(predictions=[...], references=[...])

Scores are 0-100 and come from lab.eval.metrics (no metric code here).
"""
import evaluate

from lab.eval import metrics


class Bleu(evaluate.Metric):
    def _info(self):
        return metrics.evaluate_info("bleu")

    def _compute(self, predictions, references):
        return metrics.evaluate_compute("bleu", predictions, references)
