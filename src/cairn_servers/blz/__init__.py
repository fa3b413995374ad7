"""blz: local llms.txt documentation search with exact line citations."""
