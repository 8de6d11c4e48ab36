"""The service: its configuration (`config`), the OpenAI-compatible HTTP app (`http`) over a
`Service` (`service`), its Prometheus metrics (`metrics`) and the Ray Serve application
(`app`).  Nothing is imported here, so reading a config stays cheap."""
