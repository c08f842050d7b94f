"""Predictors that run outside the scheduling core (issue 15): urgency from what a request says, and (to come)
output-length distributions. The core sees only their results on a :class:`~semsched.core.request.Request`."""
