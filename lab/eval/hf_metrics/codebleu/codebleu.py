"""The lab's codebleu metric (CodeBLEU (Java or C#)) as an `evaluate` module.

    evaluate.load("<this folder>").compute(predictions=[...], references=[...], language="cs")

Scores are 0-100 and come from lab.eval.metrics (no metric code here).
"""
from lab.eval.metrics import evaluate_module

CodeBleu = evaluate_module("codebleu", "CodeBleu")
