"""The lab's codebleu metric (CodeBLEU (Java or C#)) as an `evaluate` module.

    evaluate.load("<this folder>").compute(predictions=[...], references=[...], language="cs")

Scores are 0-100 and come from lab.eval.metrics (no metric code here).
"""
import evaluate

from lab.eval import metrics


class CodeBleu(evaluate.Metric):
    def _info(self):
        return metrics.evaluate_info("codebleu")

    def _compute(self, predictions, references, language=None):
        return metrics.evaluate_compute("codebleu", predictions, references, language)
