"""Protocol roles: Clarifier, User Answerer, Rewriter (rule-based baselines and LLM roles)."""
