def is_compiling():
    return False
