"""What several layers share and that belongs to none of them: the bounded HTTP listener the scaler's
and the controller's ports serve through, Kubernetes quantities, and the diagnostics of ``warmscale
advise`` that the scaler and the controller compute too. Imports nothing of warmscale's layers (pyproject's
import-linter layers contract puts it at the bottom)."""
