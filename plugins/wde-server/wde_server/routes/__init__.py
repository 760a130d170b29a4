"""The routes, one module per API family; ``common`` holds what they share."""
