"""The search domain's work: functions that run searches (reads of the knowledge tables live in
``retrieval.selectors``)."""
