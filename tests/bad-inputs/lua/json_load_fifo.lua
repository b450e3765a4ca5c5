print(vram.json.load("lua/gen_fifo.json"))
