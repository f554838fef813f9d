"""What a client asks: the router of client frames and one module per request family
(resume, watch, listing, commands and the command link, approvals).
"""
