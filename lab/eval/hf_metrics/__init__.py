"""Hugging Face `evaluate` modules of the lab's metrics, one folder per metric (NAME/NAME.py).

Load them from their local folders, which works offline (HF_HUB_OFFLINE=1):

    from lab.eval.metrics import load_evaluate_metric
    bleu = load_evaluate_metric("bleu")            # evaluate.load(".../hf_metrics/bleu")
    bleu.compute(predictions=[...], references=[...])   # {"bleu": 61.08, ...}

Each module only declares its inputs; the numbers come from lab.eval.metrics.
"""
