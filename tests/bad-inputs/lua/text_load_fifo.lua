print(vram.text.load("lua/gen_fifo.json"))
