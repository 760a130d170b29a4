"""Plugin machinery: the hook specifications, the plugin host that loads entry points, the registry and its entries."""
