"""The small shared types every layer may depend on: typed errors, canonical site names, the `Edit`/`StepContext`
contract of interventions, atomic file writes and the `Result` base of every method result. Nothing here knows a
model, a method or a figure."""
