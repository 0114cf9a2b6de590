"""The lab's meteor metric (NLTK's METEOR (WordNet 3.0, offline)) as an `evaluate` module.

    evaluate.load("<this folder>").compute(predictions=[...], references=[...])

Scores are 0-100 and come from lab.eval.metrics (no metric code here).
"""
import evaluate

from lab.eval import metrics


class Meteor(evaluate.Metric):
    def _info(self):
        return metrics.evaluate_info("meteor")

    def _compute(self, predictions, references):
        return metrics.evaluate_compute("meteor", predictions, references)
