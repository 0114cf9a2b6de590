"""The lab's em metric (exact match) as an `evaluate` module.

    evaluate.load("<this folder>").compute(predictions=[...], references=[...], task="generation")

`task` picks the definition of that task's CodeXGLUE evaluator: "translation" (the default:
equal after strip()) or "generation" (the same whitespace tokens).
Scores are 0-100 and come from lab.eval.metrics (no metric code here).
"""
import evaluate

from lab.eval import metrics


class ExactMatch(evaluate.Metric):
    def _info(self):
        return metrics.evaluate_info("em")

    def _compute(self, predictions, references, task=None):
        return metrics.evaluate_compute("em", predictions, references, task=task)
