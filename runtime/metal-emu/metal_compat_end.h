// metal-emu: ends the MSL region of an emulator driver (undoes metal_compat.h's macros)
#undef kernel
#undef device
#undef constant
#undef thread
#undef threadgroup
