"""The worker's operating surface: health, metrics and the HTTP server that serves them."""
