"""The study's LLM arm: one-shot prompts on a contaminated set and its perturbed twin (llm_eval),
and the automated perturbation that builds such twins (perturb, Table I in table_i)."""
