"""The search: design spaces, CP-SAT feasibility, Optuna, hierarchical exhaustive sweep, Pareto fronts."""
