"""Ray Serve integration: a custom autoscaling policy whose replica counts come from warmscale's scaler
(docs/gangs-queues.md, "Ray Serve")."""
