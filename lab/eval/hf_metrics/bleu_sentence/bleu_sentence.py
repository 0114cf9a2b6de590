"""The lab's bleu_sentence metric (mean sentence BLEU-4) as an `evaluate` module.

    evaluate.load("<this folder>").compute(predictions=[...], references=[...])

Scores are 0-100 and come from lab.eval.metrics (no metric code here).
"""
import evaluate

from lab.eval import metrics


class BleuSentence(evaluate.Metric):
    def _info(self):
        return metrics.evaluate_info("bleu_sentence")

    def _compute(self, predictions, references):
        return metrics.evaluate_compute("bleu_sentence", predictions, references)
