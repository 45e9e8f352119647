"""coa-envs: Chain-of-Agents environments (placeholder until the foundation lands)."""
