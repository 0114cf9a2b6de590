"""The lab's meteor metric (NLTK's METEOR (WordNet 3.0, offline)) as an `evaluate` module.

    evaluate.load("<this folder>").compute(predictions=[...], references=[...])

Scores are 0-100 and come from lab.eval.metrics (no metric code here).
"""
from lab.eval.metrics import evaluate_module

Meteor = evaluate_module("meteor", "Meteor")
