"""Stream capture, as a flag the program sets."""

capturing = [False]


def is_current_stream_capturing():
    return capturing[0]
